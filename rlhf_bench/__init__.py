"""rlhf_bench: the rlhf flavor's gate, a tiny offline GRPO run that must raise its reward.

Importing this package puts the process into Hugging Face offline mode (HF_HUB_OFFLINE,
HF_DATASETS_OFFLINE and TRANSFORMERS_OFFLINE set to 1), before anything below imports
transformers, datasets or trl: the run builds its tokenizer, model and data itself and
must never download. huggingface_hub reads these variables when it is first imported, so
import rlhf_bench before transformers (`rlhf_bench.grpo.check_offline()` says if that
went wrong). Child processes (the accelerate launch of `--processes 2`) inherit them.

Modules: grpo (tokenizer, model, reward, data, training, save/reload), ranks (the
multi-process run under `accelerate launch`), gate (the verdict, result.json and the
reward curve), errors (typed errors and exit codes), __main__ (the command line,
`python -m rlhf_bench --help`).
"""

import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_name] = "1"
del _name

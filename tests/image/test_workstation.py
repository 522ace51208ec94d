"""The image as a workstation people live in, used as they use it: the everyday tools, the
scientific and RL stack, widgets and TensorBoard inside JupyterLab, and the SSH workflows
(sftp, rsync, a tunnel to JupyterLab, agent forwarding for git, jobs that outlive the
session), each through the real client: OpenSSH's ssh, sftp and rsync, Jupyter's REST API
and kernel protocol, TensorBoard's own HTTP API through jupyter-server-proxy.

One container (JupyterLab + sshd, PUBLIC_KEY given, a volume on /workspace) serves them all.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess

import pytest
import requests
import testinfra

from tests.image.conftest import TEST_LABELS
from tests.image.service_helpers import (
    Jupyter,
    client_options,
    lab_and_sshd,
    ssh,
    ssh_argv,
)
from tests.image.tracked_container import free_port, wait_until

pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def box(docker, image, keys):
    """JupyterLab and sshd together, as `docker run -p ... -e PUBLIC_KEY=... IMAGE` makes them."""
    with lab_and_sshd(docker, image, keys["public"], TEST_LABELS) as running:
        yield running


@pytest.fixture(scope="module")
def host(box):
    return testinfra.get_host(f"docker://{box[0].container.id}")


def _ssh(box, keys, command: str, timeout: int = 120, **kwargs) -> subprocess.CompletedProcess:
    return ssh(box[1], keys["key"], keys["known_hosts"], command, timeout=timeout, **kwargs)


# --- the everyday tools -------------------------------------------------------------

TOOLS = {
    "git": "git --version",
    "git-lfs": "git lfs version",
    "ssh": "ssh -V",
    "tmux": "tmux -V",
    "rsync": "rsync --version",
    "curl": "curl --version",
    "wget": "wget --version",
    "vi": "vi --version",
    "nano": "nano --version",
    "htop": "htop --version",
    "zip": "zip -v",
    "unzip": "unzip -v",
    "make": "make --version",
    "nvitop": "nvitop --version",
}


@pytest.mark.parametrize("tool", list(TOOLS))
def test_the_tool_runs(host, tool):
    result = host.run(TOOLS[tool])
    assert result.rc == 0, result.stderr
    assert (result.stdout + result.stderr).strip()


def test_time_zones_are_there(host):
    assert host.file("/usr/share/zoneinfo/Europe/Berlin").exists
    assert host.run("TZ=Asia/Tokyo date +%Z").stdout.strip() == "JST"


def test_nvitop_without_a_gpu_says_nvml_is_missing(host):
    """What docs/using-the-image.md says: exit 1 and one named reason, no traceback (the matrix's nvitop on a host without
    the driver's NVML, as the image tests run: no --gpus)."""
    result = host.run("nvitop --once")
    assert result.rc == 1 and "(NVML) not found" in result.stdout + result.stderr, (result.rc, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr


# --- sshd allows what the workflows need and nothing more ------------------------------


@pytest.fixture(scope="module")
def sshd_settings(host):
    settings: dict[str, str] = {}
    for line in host.check_output("/usr/sbin/sshd -T -f /tmp/proven-torch/sshd_config").splitlines():
        key, _, value = line.partition(" ")
        settings.setdefault(key, value)
    return settings


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("allowtcpforwarding", "yes"),
        ("allowagentforwarding", "yes"),
        ("x11forwarding", "yes"),  # ssh -X (docs/using-the-image.md, "Watch your agent")
        ("x11uselocalhost", "yes"),
        ("addressfamily", "inet"),
        ("permitrootlogin", "no"),
        ("passwordauthentication", "no"),
        ("subsystem", "sftp internal-sftp -d /workspace"),  # sftp starts where ssh and the Lab do
    ],
)
def test_sshd_setting(sshd_settings, setting, value):
    assert sshd_settings[setting] == value


# --- the scientific and RL stack ------------------------------------------------------

STACK = r"""
import json, tempfile, pathlib
import numpy as np, pandas as pd, scipy, scipy.signal, cv2, imageio.v2 as imageio
import gymnasium as gym, ale_py
from gymnasium.wrappers import AtariPreprocessing

out = {"pandas": pd.__version__, "scipy": scipy.__version__, "cv2": cv2.__version__}
out["frame_mean"] = float(pd.DataFrame({"x": [1.0, 2.0, 3.0]})["x"].mean())
out["lfilter"] = scipy.signal.lfilter([1.0], [1.0, -0.5], [1.0, 0.0, 0.0]).tolist()

gym.register_envs(ale_py)
env = gym.make("ALE/Pong-v5")
obs, _ = env.reset(seed=0)
obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
out["pong_obs"] = list(obs.shape)
wrapped = AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1), frame_skip=4, screen_size=84, grayscale_obs=True)
obs, _ = wrapped.reset(seed=0)
obs, *_ = wrapped.step(0)
out["preprocessed_obs"] = list(obs.shape)

cart = gym.make("CartPole-v1", render_mode="rgb_array")
cart.reset(seed=0)
frames = []
for _ in range(30):
    frames.append(cart.render())
    _, _, done, trunc, _ = cart.step(cart.action_space.sample())
    if done or trunc:
        cart.reset()
out["frame"] = list(frames[0].shape)
video = pathlib.Path(tempfile.mkdtemp()) / "episode.mp4"
imageio.mimsave(video, frames, fps=30)
out["video_bytes"] = video.stat().st_size
out["video_frames"] = sum(1 for _ in imageio.get_reader(video))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def stack(box, keys):
    """The stack exercised over SSH, as a batch job would (the user's PATH and venv)."""
    result = _ssh(box, keys, f"python -c {shlex.quote(STACK)}", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_pandas_and_scipy_compute(stack, variant):
    assert stack["frame_mean"] == 2.0 and stack["lfilter"] == [1.0, 0.5, 0.25]
    assert stack["pandas"] == dict(variant.packages)["pandas"] and stack["scipy"] == dict(variant.packages)["scipy"]


def test_an_atari_game_resets_and_steps_with_its_rom(stack):
    assert stack["pong_obs"] == [210, 160, 3]


def test_atari_preprocessing_gives_84_by_84_frames(stack):
    assert stack["preprocessed_obs"] == [84, 84]


def test_cartpole_renders_rgb_frames_and_an_episode_video_is_written(stack):
    assert stack["frame"] == [400, 600, 3]
    assert stack["video_bytes"] > 1000 and stack["video_frames"] == 30


# --- SSH workflows ------------------------------------------------------------------------


def test_sftp_round_trip_keeps_the_bytes(box, keys, tmp_path):
    payload = os.urandom(200_000)
    (tmp_path / "up.bin").write_bytes(payload)
    batch = tmp_path / "batch"
    batch.write_text(f"put {tmp_path / 'up.bin'} /workspace/sftp.bin\nget /workspace/sftp.bin {tmp_path / 'down.bin'}\n")
    argv = ["sftp", "-P", str(box[1]), "-b", str(batch), *client_options(keys["key"], keys["known_hosts"]), "user@127.0.0.1"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "down.bin").read_bytes() == payload


def test_rsync_copies_a_directory_both_ways(box, keys, tmp_path):
    src = tmp_path / "data"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(os.urandom(50_000))
    os.chmod(src / "a.txt", 0o640)
    rsh = shlex.join(["ssh", "-p", str(box[1]), *client_options(keys["key"], keys["known_hosts"])])
    up = subprocess.run(
        ["rsync", "-a", "-e", rsh, f"{src}/", "user@127.0.0.1:/workspace/rsync-data/"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert up.returncode == 0, up.stderr
    back = tmp_path / "back"
    down = subprocess.run(
        ["rsync", "-a", "-e", rsh, "user@127.0.0.1:/workspace/rsync-data/", f"{back}/"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0, down.stderr
    assert (back / "a.txt").read_text() == "alpha\n" and (back / "sub" / "b.bin").read_bytes() == (
        src / "sub" / "b.bin"
    ).read_bytes()
    assert (back / "a.txt").stat().st_mode & 0o777 == 0o640  # -a keeps modes


def test_a_tunnel_reaches_jupyterlab_and_the_token_is_still_required(box, keys):
    local = free_port()
    argv = ssh_argv(box[1], keys["key"], keys["known_hosts"], [], options=("ExitOnForwardFailure=yes",))
    argv[1:1] = ["-N", "-L", f"127.0.0.1:{local}:127.0.0.1:8888"]
    tunnel = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        url = f"http://127.0.0.1:{local}/api/status"

        def answers():
            try:
                return [requests.get(url, timeout=5)]  # in a list: a 403 Response is falsy
            except requests.ConnectionError:
                assert tunnel.poll() is None, tunnel.stderr.read()
                return None

        (response,) = wait_until(answers, 30, "JupyterLab through the SSH tunnel")
        assert response.status_code == 403
        assert requests.get(url, headers={"Authorization": f"token {box[2]}"}, timeout=10).status_code == 200
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


def test_a_forwarded_agent_lets_git_inside_use_the_users_key_and_no_key_is_stored(box, keys, tmp_path):
    """ssh -A: inside, `ssh-add -l` lists the laptop's key, and git clones over SSH with it (from the
    container's own sshd, which accepts that key); the private key is nowhere in the container."""
    sock = tmp_path / "agent.sock"
    agent = subprocess.run(["ssh-agent", "-a", str(sock)], capture_output=True, text=True, timeout=30, check=True)
    agent_pid = int(agent.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
    try:
        subprocess.run(["ssh-add", str(keys["key"])], env=env, capture_output=True, timeout=30, check=True)
        # The body's last line holds private key material (the first is the same in every OpenSSH key).
        secret_line = keys["key"].read_text().splitlines()[-2]
        script = (
            "set -e; ssh-add -l; rm -rf /workspace/repo.git /tmp/clone; git init -q --bare /workspace/repo.git; "
            "GIT_SSH_COMMAND='ssh -p 2222 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR' "
            "git clone -q user@127.0.0.1:/workspace/repo.git /tmp/clone 2>&1; echo cloned; "
            f"! grep -rqsF {shlex.quote(secret_line)} /home /workspace /tmp /opt /var/lib/proven-torch"
        )
        # The agent authenticates (options given first win over client_options' IdentityAgent=none).
        options = ("ForwardAgent=yes", f"IdentityAgent={sock}", "IdentitiesOnly=no")
        argv = ssh_argv(box[1], None, keys["known_hosts"], script, options=options)
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stdout + result.stderr
        fingerprint = subprocess.run(["ssh-keygen", "-lf", str(keys["key"])], capture_output=True, text=True).stdout.split()[1]
        assert fingerprint in result.stdout and "cloned" in result.stdout
    finally:
        os.kill(agent_pid, signal.SIGTERM)


def test_jobs_outlive_the_ssh_session_and_their_output_is_there_next_login(box, keys):
    started = _ssh(
        box,
        keys,
        "rm -f /workspace/nohup.log /workspace/tmux.log; "
        "nohup bash -c 'sleep 4; echo nohup-done > /workspace/nohup.log' >/dev/null 2>&1 & echo $!; "
        "tmux new-session -d -s train \"bash -c 'sleep 4; echo tmux-done > /workspace/tmux.log; sleep 60'\"",
    )
    assert started.returncode == 0, started.stderr
    pid = started.stdout.split()[0]
    alive = _ssh(box, keys, f"kill -0 {pid} && tmux has-session -t train && echo alive")  # a new session, the first is gone
    assert "alive" in alive.stdout, alive.stderr
    done = wait_until(
        lambda: (
            (r := _ssh(box, keys, "cat /workspace/nohup.log /workspace/tmux.log 2>/dev/null")).stdout.split()
            == ["nohup-done", "tmux-done"]
            and r
        ),
        30,
        "the jobs' output on a later login",
    )
    assert done.returncode == 0
    _ssh(box, keys, "tmux kill-session -t train")


# --- JupyterLab: widgets and TensorBoard behind port 8888 ---------------------------------


def test_tqdm_notebook_draws_a_widget_progress_bar(box):
    """Without ipywidgets tqdm.notebook prints 'IProgress not found' instead; with it the kernel
    offers the front end a widget view (what JupyterLab's widget manager renders)."""
    out = Jupyter(box[0].ports[8888], box[2]).run_in_new_kernel(
        "from tqdm.notebook import tqdm\nfor _ in tqdm(range(20)):\n    pass\nprint('loop done')"
    )
    assert out["status"] == "ok", out
    assert "IProgress not found" not in out["stderr"] and "loop done" in out["stdout"]
    assert any("application/vnd.jupyter.widget-view+json" in mimes for mimes in out["display"]), out


def test_the_lab_ships_the_widget_and_proxy_extensions(box):
    page = requests.get(f"http://127.0.0.1:{box[0].ports[8888]}/lab?token={box[2]}", timeout=30).text
    assert "@jupyter-widgets/jupyterlab-manager" in page and "@jupyterhub/jupyter-server-proxy" in page


def test_tensorboard_is_served_under_8888_with_the_token_and_shows_the_ppo_gates_scalars(box, keys):
    run = _ssh(
        box,
        keys,
        "python -m ppo_bench --device cpu --seed 1 --total-timesteps 8192 --num-envs 8 --num-steps 64 "
        "--threads 1 --no-progress --out-dir /workspace/runs/ppo-test",
        timeout=300,
    )
    assert run.returncode in (0, 3), run.stderr[-2000:]  # 3: below target, which a tiny run is; its scalars are written
    base = f"http://127.0.0.1:{box[0].ports[8888]}/tensorboard"
    assert requests.get(base + "/", timeout=30, allow_redirects=False).status_code in (302, 403)  # no token: no TensorBoard
    auth = {"Authorization": f"token {box[2]}"}

    def runs():
        response = requests.get(base + "/data/runs", headers=auth, timeout=30)
        return response.ok and any("ppo-test" in r for r in response.json()) and response.json()

    names = wait_until(runs, 90, "TensorBoard (started by the proxy) listing the PPO run")
    tags = requests.get(base + "/data/plugin/scalars/tags", headers=auth, timeout=30).json()
    run_name = next(r for r in names if "ppo-test" in r)
    assert tags[run_name], tags
    page = requests.get(base + "/", headers=auth, timeout=30)
    assert page.status_code == 200 and "TensorBoard" in page.text

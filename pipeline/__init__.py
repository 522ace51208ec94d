"""The host side of proven-torch: build, validate, tag, push, sign and verify images. Its modules sit in
five layers, each importing only its own or lower ones: the map is docs/architecture.md's table (held by
tests/unit/test_layers.py). Code shared with the image lives in common/; nothing here imports smoke/,
ppo_bench/ or rlhf_bench/.
"""

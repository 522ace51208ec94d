"""What the image's commands (smoke/, ppo_bench/, rlhf_bench/, container/) and the host's
pipeline/ both use, written once: exit codes, one-line argument errors and whole-file writes
(cli), bounded process trees (procs), every wait from one table and the emulation that stretches
it (deadlines), the rules both sides apply (rules), what this machine is (host).

Standard library only, and it imports nothing of the project's but itself: in the image it sits
beside smoke/ and ppo_bench/ in /opt/proven-torch, on the host it is imported by pipeline/.
"""

"""PPO (clipped surrogate), top to bottom, after CleanRL's ppo.py.

Differences from CleanRL's ppo.py, each for a reason:
* environments reset in the same step that ends an episode (see envs.py), and a
  truncated episode (time limit) is bootstrapped with the value of its final
  observation instead of being treated as a failure;
* `--backend torch` keeps CartPole itself on the training device (envs.py), so the
  rollout makes no host round trip per step; the host reads back the episode
  returns once per iteration;
* sampling is Gumbel-max and log-probabilities are written out (no
  torch.distributions), so one rollout can be captured in a CUDA graph;
* `torchrun` scale-out (each rank its own environments, gradients averaged with
  one all_reduce per minibatch), checkpoints with RNG and environment states
  for an exact `--resume`, and a result.json that the image gate reads.

This file is the algorithm: GAE, the PPO loss and update, and the training loop. What it
trains and on what lives beside it: agents.py (the MLP and the Nature CNN), envs.py (the
environments), backends.py (which environments and agent an id gets, with their defaults);
its plumbing too: config.py (Args, the options), device.py (device and speed options),
distributed.py (torchrun collectives), checkpoint.py (checkpoints and --resume), outputs.py
(result.json, learning curve, TensorBoard, progress).

Entry point: `python -m ppo_bench --help` (CLI in __main__.py); `train(Args(...))`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn as nn

from common import host
from ppo_bench import checkpoint, outputs
from ppo_bench.backends import BACKENDS
from ppo_bench.config import Args, resolve_args
from ppo_bench.device import graph_of_rollout, make_autocast, make_optimizer, maybe_compile, pick_device, resolve_amp
from ppo_bench.distributed import Collectives

# =============================================================================
# The pieces of the PPO update, as plain functions (the unit tests check them).
# =============================================================================


def compute_gae(rewards, values, dones, next_value, gamma: float, gae_lambda: float):
    """Generalised advantage estimation over a (num_steps, num_envs) rollout.

    `dones[t]` is 1 where the episode ended AT step t (its transition t was the
    last), so step t's successor value is masked out. Returns (advantages, returns).
    """
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(num_steps)):
        nextvalues = next_value if t == num_steps - 1 else values[t + 1]
        nextnonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def clipped_policy_loss(newlogprob, oldlogprob, advantages, clip_coef: float):
    """PPO's clipped surrogate (to minimise); also returns approx KL and clip fraction."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()  # http://joschu.net/blog/kl-approx.html
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return pg_loss, approx_kl, clipfrac


def clipped_value_loss(newvalue, oldvalue, returns, clip_coef: float, clip: bool = True):
    """0.5 * max(unclipped, clipped) squared error (or plain 0.5 * MSE with clip=False)."""
    v_loss_unclipped = (newvalue - returns) ** 2
    if not clip:
        return 0.5 * v_loss_unclipped.mean()
    v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
    v_loss_clipped = (v_clipped - returns) ** 2
    return 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()


# =============================================================================
# Rollout storage, and what travels from the rollout to the update and the logs.
# =============================================================================


@dataclass
class Storage:
    """The rollout's tensors. Every rollout writes into these same tensors (a CUDA graph needs fixed addresses)."""

    obs: torch.Tensor
    final_obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terms: torch.Tensor
    truncs: torch.Tensor
    ep_ret: torch.Tensor
    ep_len: torch.Tensor
    next_obs: torch.Tensor

    @classmethod
    def allocate(cls, T: int, N: int, envs, device: torch.device) -> Storage:
        shape = envs.single_observation_shape
        zeros = functools.partial(torch.zeros, device=device)
        actions = zeros((T, N, envs.num_actions)) if envs.continuous else zeros((T, N), dtype=torch.long)
        return cls(
            obs=zeros((T, N) + shape, dtype=envs.observation_dtype),
            final_obs=zeros((T, N) + shape, dtype=envs.observation_dtype),
            actions=actions,
            logprobs=zeros((T, N)),
            values=zeros((T, N)),
            rewards=zeros((T, N)),
            terms=zeros((T, N), dtype=torch.bool),
            truncs=zeros((T, N), dtype=torch.bool),
            ep_ret=zeros((T, N)),
            ep_len=zeros((T, N), dtype=torch.int32),
            next_obs=zeros((N,) + shape, dtype=envs.observation_dtype),
        )


class Batch(NamedTuple):
    """One rollout flattened to num_steps * num_envs rows (or a minibatch of them): what the update trains on."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor


class LossStats(NamedTuple):
    """An update's losses, each the mean over its minibatches (TensorBoard's losses/...)."""

    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    clipfrac: float


APPROX_KL = LossStats._fields.index("approx_kl")  # its place in ppo_loss's stacked stats


class Update(NamedTuple):
    """What one update did: its stacked stats (LossStats' order) summed over its minibatches, and how many epochs ran."""

    stats_sum: torch.Tensor
    minibatches: int
    epochs: int

    def losses(self) -> LossStats:
        return LossStats(*(self.stats_sum / max(self.minibatches, 1)).tolist())


class Episode(NamedTuple):
    """An episode that ended in a rollout (any rank's): the rollout step it ended at, its return and length."""

    t: float
    ret: float
    length: float


# =============================================================================
# The update: the PPO loss of a minibatch, and epochs of minibatch steps over a rollout.
# =============================================================================


def ppo_loss(agent, args: Args, autocast, mb: Batch):
    """The clipped PPO loss of one minibatch, and its stats stacked in LossStats' order."""
    with autocast():
        newlogprob, entropy, newvalue = agent.evaluate(mb.obs, mb.actions)
    newlogprob, entropy, newvalue = newlogprob.float(), entropy.float(), newvalue.float()
    mb_advantages = mb.advantages
    if args.norm_adv:
        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
    pg_loss, approx_kl, clipfrac = clipped_policy_loss(newlogprob, mb.logprobs, mb_advantages, args.clip_coef)
    v_loss = clipped_value_loss(newvalue, mb.values, mb.returns, args.clip_coef, args.clip_vloss)
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    return loss, torch.stack((pg_loss, v_loss, entropy_loss, approx_kl, clipfrac)).detach()


def ppo_update(args: Args, batch: Batch, loss_fn, optimizer, scaler, params, comms: Collectives, tick=lambda: None) -> Update:
    """Epochs of minibatch steps over one rollout; `tick()` after each (the progress display's chance to print)."""
    batch_size = batch.obs.shape[0]
    minibatch_size = batch_size // args.num_minibatches
    stats_sum = torch.zeros(len(LossStats._fields), device=batch.obs.device)
    n_minibatches, epochs_run = 0, 0
    for _epoch in range(args.update_epochs):
        epochs_run += 1
        # Shuffle once per epoch, then cut contiguous minibatches (one gather per tensor per epoch).
        perm = torch.randperm(batch_size, device=batch.obs.device)
        shuffled = Batch(*(x[perm] for x in batch))
        for start in range(0, batch_size, minibatch_size):
            loss, stats = loss_fn(Batch(*(x[start : start + minibatch_size] for x in shuffled)))
            optimizer.zero_grad(set_to_none=True)
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if comms.world_size > 1:
                # Scaled gradients are averaged first, then unscaled: every rank then sees the same
                # inf/NaN (GradScaler skips the step on all of them together), the loss scales stay equal.
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                comms.mean_(flat, "all_reduce of the gradients")
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                    offset += p.numel()
            if scaler is not None:
                scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(params, args.max_grad_norm, foreach=True)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            stats_sum += stats
            n_minibatches += 1
            tick()
        if args.target_kl is not None:
            # Decided together: each rank's own KL differs, and a rank that stopped alone
            # would leave the others waiting in their next all_reduce.
            approx_kl = stats[APPROX_KL].clone()
            comms.mean_(approx_kl, "all_reduce of the approximate KL (early stopping)")
            if approx_kl.item() > args.target_kl:
                break
    return Update(stats_sum, n_minibatches, epochs_run)


# =============================================================================
# Training: seeding, then the loop (rollout, advantages, update, bookkeeping).
# =============================================================================


def seed_everything(seed: int, deterministic: bool, device: torch.device) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every device's default generator
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = deterministic
        torch.backends.cudnn.benchmark = not deterministic
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def train(args: Args) -> dict:
    """Run PPO; returns the result dict (also written to out_dir/result.json by rank 0).

    Its clocks (wall and process CPU time) start once the arguments are checked, the
    device is chosen and torchrun's ranks have met, with a first line saying what runs
    and what ends it; so the times in result.json include setting up environments,
    networks and the TensorBoard writer, but not starting Python, importing torch and
    the environment libraries, or initialising CUDA.
    """
    args = resolve_args(args)
    device = pick_device(args, int(os.environ.get("LOCAL_RANK", "0")))
    args = dataclasses.replace(args, amp=resolve_amp(args, device))
    comms = Collectives(device, args.dist_timeout)
    rank, world_size = comms.rank, comms.world_size
    if args.threads:
        torch.set_num_threads(args.threads)
    T, N = args.num_steps, args.num_envs
    global_batch = N * T * world_size
    num_iterations = max(1, args.total_timesteps // global_batch)
    # The run's own CPU time, for the host's condition: this process, or under torchrun every rank (its launcher's tree).
    own_root = os.getppid() if world_size > 1 else None
    t_start, cpu_start, host_start = time.perf_counter(), time.process_time(), host.cpu_sample(own_root)
    if rank == 0:
        print(
            f"ppo_bench: {args.env_id} ({args.backend} backend) on {device}, {world_size} process{'es' if world_size > 1 else ''}: "
            f"{outputs.run_bound(args)}; {global_batch:,} steps per iteration",
            flush=True,
        )
    out_dir = Path(args.out_dir)
    ckpt_path = out_dir / ("checkpoint.pt" if world_size == 1 else f"checkpoint-rank{rank}.pt")
    ckpt = checkpoint.resume_point(args, comms, ckpt_path)

    # Seeding: rank r uses seed + r; all ranks then take rank 0's initial weights.
    seed_everything(args.seed + rank, args.torch_deterministic, device)
    backend = BACKENDS[args.backend]
    envs = backend.env.open(args.env_id, N, seed=args.seed + 100_000 * rank, device=device)
    obs_shape = envs.single_observation_shape
    agent = backend.agent.for_envs(envs, args).to(device)
    for p in agent.parameters():
        comms.broadcast_(p.data, "the initial weights (broadcast from rank 0)")
    params = list(agent.parameters())
    optimizer = make_optimizer(args, params)
    scaler = torch.amp.GradScaler("cuda") if args.amp == "fp16" else None
    autocast = make_autocast(args, device)
    store = Storage.allocate(T, N, envs, device)
    if ckpt is None:
        state = checkpoint.RunState()
        store.next_obs.copy_(envs.reset())
    else:
        state = checkpoint.restore(ckpt, agent, optimizer, scaler, envs, store.next_obs, device)
        if not envs.resumable:
            print(f"ppo_bench: --resume: the checkpoint holds no {args.env_id} emulator states; new games start", flush=True)
            store.next_obs.copy_(envs.reset())
    recent = deque(state.ep_returns[-args.target_window :], maxlen=args.target_window)
    timing = state.timing
    wall0, cpu0 = timing["wall"], timing["cpu"]  # carried over from the interrupted run
    progress = outputs.Progress(args, state.global_step, clock=t_start, offset=wall0, quiet=rank != 0)

    # Environments that step on the device (torch's CartPole) compile, and are graphed, together with
    # the policy: --cuda-graphs captures the whole rollout. Host environments stay outside: only the
    # policy step and the loss are compiled, and --cuda-graphs graphs those.
    on_device = envs.steps_on_device
    host_graphs = args.cuda_graphs and not on_device

    def act(obs):
        with autocast():
            return agent.act(obs)

    policy = act if on_device else maybe_compile(act, args, graphs=host_graphs)

    def act_and_step(obs):
        action, logprob, value = policy(obs)
        return action, logprob, value, envs.step(action)

    if on_device:
        act_and_step = maybe_compile(act_and_step, args)

    @torch.no_grad()
    def rollout():
        for t in range(T):
            progress.tick(state.global_step + t * N * world_size)  # a line when one is due, also mid-rollout
            store.obs[t].copy_(store.next_obs)
            action, logprob, value, out = act_and_step(store.next_obs)
            store.actions[t].copy_(action)
            store.logprobs[t].copy_(logprob)
            store.values[t].copy_(value)
            store.rewards[t].copy_(out.reward)
            store.terms[t].copy_(out.terminated)
            store.truncs[t].copy_(out.truncated)
            store.final_obs[t].copy_(out.final_obs)
            store.ep_ret[t].copy_(out.episode_return)
            store.ep_len[t].copy_(out.episode_length)
            store.next_obs.copy_(out.obs)

    rollout_graph = graph_of_rollout(rollout, envs, store.next_obs, device) if args.cuda_graphs and on_device else None

    loss_fn = maybe_compile(functools.partial(ppo_loss, agent, args, autocast), args, graphs=host_graphs)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def save(iteration: int) -> None:
        now = checkpoint.record(args, state, iteration, agent, optimizer, scaler, envs, store.next_obs, device)
        checkpoint.save(ckpt_path, now, keep_previous=world_size > 1)

    writer = outputs.open_writer(out_dir, args, resumed_at=state.global_step if ckpt else None) if rank == 0 else None
    t_loop, last_ckpt = time.perf_counter(), time.monotonic()
    iteration = state.start_iteration - 1
    stop = sliced = timed_out = False
    for iteration in range(state.start_iteration, num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate

        # --- rollout -----------------------------------------------------------------
        sync()
        t0 = time.perf_counter()
        rollout_graph.replay() if rollout_graph is not None else rollout()
        sync()
        timing["rollout"] += time.perf_counter() - t0
        iter_start_step = state.global_step
        state.global_step += global_batch

        # Episodes that ended in this rollout: one read-back per iteration, every rank's.
        done = store.ep_len > 0
        rows = torch.stack((done.nonzero()[:, 0].double(), store.ep_ret[done].double(), store.ep_len[done].double()), 1)
        gathered = comms.gather(rows.cpu().tolist(), "all_gather_object of the finished episodes")
        finished = [Episode(*row) for rank_rows in gathered for row in rank_rows]
        for episode in finished:
            state.ep_steps.append(iter_start_step + (int(episode.t) + 1) * N * world_size)
            state.ep_returns.append(episode.ret)
            state.ep_lengths.append(int(episode.length))
            recent.append(episode.ret)

        # --- advantages and update --------------------------------------------------------
        t0 = time.perf_counter()
        with torch.no_grad():
            rewards = store.rewards
            if args.bootstrap_truncation:
                # A time-limit cut is not a failure: add gamma * V(final obs) to its reward
                # (the value of the cut steps' final observations only: Atari's are CNN passes).
                cut = (store.truncs & ~store.terms).reshape(-1)
                if cut.any():
                    with autocast():
                        final_values = agent.value(store.final_obs.reshape((-1,) + obs_shape)[cut]).float()
                    rewards = store.rewards.reshape(-1).index_add(0, cut.nonzero()[:, 0], args.gamma * final_values)
                    rewards = rewards.view(T, N)
            with autocast():
                next_value = agent.value(store.next_obs).float()
            dones = (store.terms | store.truncs).float()
            advantages, returns = compute_gae(rewards, store.values, dones, next_value, args.gamma, args.gae_lambda)
        batch = Batch(
            obs=store.obs.reshape((-1,) + obs_shape),
            actions=store.actions.reshape((N * T,) + store.actions.shape[2:]),
            logprobs=store.logprobs.reshape(-1),
            advantages=advantages.reshape(-1),
            returns=returns.reshape(-1),
            values=store.values.reshape(-1),
        )
        update = ppo_update(args, batch, loss_fn, optimizer, scaler, params, comms, tick=lambda: progress.tick(state.global_step))
        state.update_epochs.append(update.epochs)
        sync()
        timing["update"] += time.perf_counter() - t0

        # --- bookkeeping ---------------------------------------------------------------
        timing["wall"] = wall0 + time.perf_counter() - t_start
        timing["cpu"] = cpu0 + time.process_time() - cpu_start
        mean_recent = sum(recent) / len(recent) if recent else None
        if state.reached["steps_to_target"] is None and reached_target(args, recent, mean_recent):
            state.reached = {
                "steps_to_target": state.global_step,
                "seconds_to_target": timing["wall"],
                "cpu_seconds_to_target": timing["cpu"],
            }
            if rank == 0:
                print(
                    f"ppo_bench: target reached: mean return {mean_recent:.1f} >= {args.target_return:g} over the last "
                    f"{args.target_window} episodes at step {state.global_step:,} after {timing['wall']:.2f}s",
                    flush=True,
                )
        sps = (state.global_step - (state.start_iteration - 1) * global_batch) / max(time.perf_counter() - t_loop, 1e-9)
        progress.update(state.global_step, mean_recent)
        if writer is not None:
            lr = optimizer.param_groups[0]["lr"]
            outputs.log_iteration(
                writer, state.global_step, lr, mean_recent, finished, update.losses(), batch.returns, batch.values, sps
            )

        stop = args.stop_at_target and state.reached["steps_to_target"] is not None
        sliced = args.stop_after_iterations and iteration - state.start_iteration + 1 >= args.stop_after_iterations
        timed_out = bool(args.time_limit) and comms.any(
            time.perf_counter() - t_start >= args.time_limit, "the time-limit decision (all_reduce)"
        )
        if stop or sliced or timed_out or iteration == num_iterations:
            break
        due = bool(args.checkpoint_every) and time.monotonic() - last_ckpt >= args.checkpoint_every
        if comms.any(due, "the checkpoint decision (all_reduce)"):  # every rank saves the same iteration
            save(iteration)
            last_ckpt = time.monotonic()

    host_end = host.cpu_sample(own_root)
    why = outputs.stopped_by(args, stop, sliced, timed_out, iteration, num_iterations, global_batch)
    progress.close(why)
    save(iteration)
    env_settings = envs.settings()
    envs.close()
    comms.barrier("the barrier after the last checkpoint")
    result = outputs.result_record(args, state, iteration, num_iterations, world_size, device, resumed=ckpt is not None)
    result.update(
        process_wall_seconds=time.perf_counter() - t_start,
        stopped_by=why,
        env_settings=env_settings,
        host=host.host_condition(host_start, host_end, threads=run_threads(args.backend)).to_json(),
    )
    if rank == 0:
        outputs.finish(writer, out_dir, args, state.ep_steps, state.ep_returns, state.reached, result)
    comms.barrier("the barrier after the result")
    comms.close()
    return result


def run_threads(backend: str) -> int | None:
    """The threads this host's ranks compute on, for the busy rule: torch's per rank (the torch and gymnasium
    backends step their envs in the same thread); None for atari, whose ale-py steps games on threads of its own."""
    if backend == "atari":
        return None
    return torch.get_num_threads() * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def reached_target(args: Args, recent: deque, mean_recent: float | None) -> bool:
    return args.target_return is not None and len(recent) == args.target_window and mean_recent >= args.target_return

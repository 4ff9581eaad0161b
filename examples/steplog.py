"""The training examples' progress line, shared by train_ddp.py (and so train_mix.py) and train_wds.py.

A step of the examples' toy model costs about vocab x seq_len x batch multiply-adds in its output layer
(a 50k vocabulary at 8 x 512 tokens is 200M logits: tens of seconds on a loaded CPU), while the loader
itself delivers hundreds of batches a second.  Without a line per few steps such a run looks exactly like
a hang, so rank 0 prints ``step S (epoch E): T tokens/s, loss L`` after the first step and every
``--log-every`` steps (0: never).  tokens/s counts the tokens of every rank's batches (rank 0's batch
size x world size; ranks step together) since the previous line.
"""

from __future__ import annotations

import argparse
import time

LOG_EVERY = 10


def add_log_every(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-every", type=int, default=LOG_EVERY, metavar="N",
                   help=f"rank 0 prints step, tokens/s and loss after step 1 and every N steps (default "
                        f"{LOG_EVERY}; 0: never)")


class StepLog:
    """Counts the tokens trained since the last line and prints one line on the steps it is due."""

    def __init__(self, every: int, *, rank: int, world: int):
        self.every = every if rank == 0 else 0          # one line per step, not one per rank
        self.world = world
        self.tokens = 0
        self.since = time.perf_counter()

    def step(self, step: int, epoch: int, batch_tokens: int, loss) -> None:
        """After the optimizer step ``step`` (counted from 1) on a batch of ``batch_tokens`` on this rank."""
        self.tokens += batch_tokens * self.world
        if self.every <= 0 or (step != 1 and step % self.every):
            return
        now = time.perf_counter()
        rate = self.tokens / max(now - self.since, 1e-9)
        print(f"step {step} (epoch {epoch}): {rate:,.0f} tokens/s, loss {float(loss):.4f}", flush=True)
        self.tokens, self.since = 0, now

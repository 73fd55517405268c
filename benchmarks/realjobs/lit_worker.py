"""A tiny Lightning DDP job on CPU (gloo) with the same fault plan as worker.py.

Run as ``python lit_worker.py`` (Lightning starts the other ranks itself, all writing to the same
stdout/stderr) or under torchrun. Environment: RJ_FAULTS, RJ_STEPS, RJ_TS, RJ_RECORD, RJ_CKPT_DIR as
in worker.py, plus RJ_DEVICES (processes, default 4) and RJ_CKPT_EVERY (ModelCheckpoint every N
steps into RJ_CKPT_DIR; 0 = no checkpointing). The checkpointed model is ~1 MB so a 1 MB tmpfs fills.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lightning as L  # noqa: E402
import worker  # noqa: E402  (same folder: the fault plan and the faults)
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

log = logging.getLogger("train")


class TinyModel(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
        self.faults: list[dict] | None = None

    def training_step(self, batch, batch_idx):
        step = self.global_step + 1
        if self.faults is None:  # the rank is known only once the strategy has set up
            self.faults = [f for f in worker._plan()
                           if worker._mine(f, self.global_rank, socket.gethostname(), self.local_rank)]
        for f in self.faults:
            if f["step"] == step:
                worker._record(f, self.global_rank, socket.gethostname(), self.local_rank)
                worker.fire(f, self.net, step, self.global_rank)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, sync_dist=True)
        time.sleep(float(os.environ.get("RJ_STEP_S", "0.1")))
        if step % 5 == 0:
            log.info("[rank: %d] step %d loss %.4f", self.global_rank, step, loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> int:
    stamps = os.environ.get("RJ_TS", "1") == "1"
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if stamps else "%(levelname)s:%(name)s:%(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt)
    steps = int(os.environ.get("RJ_STEPS", "30"))
    every = int(os.environ.get("RJ_CKPT_EVERY", "0"))
    L.seed_everything(1234)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(4 * steps * 8, 512, generator=g),
                                          torch.randn(4 * steps * 8, 1, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model = TinyModel()
    callbacks = []
    if every:
        callbacks.append(ModelCheckpoint(dirpath=os.environ.get("RJ_CKPT_DIR", "/tmp/rj-lit-ckpt"),
                                         every_n_train_steps=every, save_top_k=-1))
    trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=int(os.environ.get("RJ_DEVICES", "4")),
                        max_steps=steps, callbacks=callbacks, enable_checkpointing=bool(every),
                        logger=False, enable_model_summary=False, log_every_n_steps=5)
    trainer.fit(model, loader)
    log.info("[rank: %d] training finished", trainer.global_rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())

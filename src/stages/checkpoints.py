"""Checkpoints a resume can trust, and the trained actor exported for evaluation."""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint


class AtomicModelCheckpoint(ModelCheckpoint):
    """Lightning's checkpoint callback, but each file is written under a temporary name and then
    renamed: a run killed while saving leaves the previous checkpoint intact, never a torn file
    that ``ckpt_path=last`` would try to load."""

    def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
        partial = f"{filepath}.partial"
        trainer.save_checkpoint(partial, self.save_weights_only)
        if trainer.is_global_zero:
            os.replace(partial, filepath)
        trainer.strategy.barrier("atomic checkpoint")
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        for logger in trainer.loggers:
            logger.after_save_checkpoint(self)


def export_actor(actor: Any, directory: str | Path) -> Path:
    """``save_pretrained`` of the actor (LoRA adapters merged into a copy) and its tokenizer, so
    ``eval.py policy=hf policy.model_name_or_path=DIR`` loads it like any HF model."""
    directory = Path(directory)
    model = actor.model
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(directory)
    actor.tokenizer.save_pretrained(directory)
    return directory

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

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """After a validation inside training, the loggers flushed and ``last.ckpt`` written
        again: the step's own checkpoint was written before the validation ran, so a run lost
        while it validated resumes owing it (the stage runs it then:
        common.validate_owed), and one lost after it resumes from this one and does not
        validate twice. The validation's rows reach the disk first, so a checkpoint that says
        "validated" always has them beside it."""
        super().on_validation_end(trainer, pl_module)
        if trainer.sanity_checking or trainer.state.fn != "fit" or trainer.global_step == 0:
            return
        for logger in trainer.loggers:
            logger.save()
        self._save_checkpoint(trainer, self.format_checkpoint_name(self._monitor_candidates(trainer),
                                                                   self.CHECKPOINT_NAME_LAST))


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

"""RL math of the training stages: pure tensor functions, no Lightning, no HF.

Batch layout: every tensor is ``[B, T]`` aligned to a trajectory row's ``token_ids`` (right-padded).
``policy_mask`` (the row's ``loss_mask``) is 1 exactly on tokens the policy generated, 0 on prompt,
tool output, template tails and padding. Log-probs and values are *of the token at position t*:
a causal LM's outputs at t - 1 belong to token t, and the stage shifts before calling in here.
Everything is computed in float32, never mutates its inputs and runs on CPU or CUDA.

    logp   = token_logprobs(logits, ids, temperature)            # logits already aligned to ids
    gap    = logprob_mismatch(rollout_logp, logp, mask)          # log from the first step
    r_tok  = outcome_rewards(reward, mask)                       # scalar on the last policy token
    adv, ret = gae_through_tools(r_tok, values, mask, gamma=1.0, lam=0.95)   # tool tokens transparent
    adv, ret = decoupled_gae(r_tok, values, mask, 1.0, actor_lam=1.0, critic_lam=0.95)  # one lambda per head
    adv    = masked_whiten(adv, mask)
    pg, s1 = policy_loss(logp, old_logp, adv, mask, clip_low=0.2, clip_high=0.28,
                         is_weights=truncated_is_weights(rollout_logp, old_logp, mask))  # TIS optional
    vf, s2 = value_loss(new_values, ret, mask)                   # 0.5 * token-mean squared error
    kl     = masked_mean(kl_penalty(logp, ref_logp, "k3", mask), mask)       # coefficient 0 by default
    ent    = masked_mean(entropy_from_logits(logits, temperature), mask)
    ev     = explained_variance(values, ret, mask)               # critic/explained_var

Modules: masked (sum/mean/var/whiten over a mask), advantages (outcome rewards, GAE), losses
(surrogate, value loss, KL), logits (log-probs, entropy), metrics (explained variance, mismatch).
"""
from .advantages import decoupled_gae, gae_through_tools, outcome_rewards
from .logits import entropy_from_logits, token_logprobs
from .losses import KL_ESTIMATORS, kl_penalty, policy_loss, value_loss
from .masked import masked_mean, masked_sum, masked_var, masked_whiten
from .metrics import explained_variance, logprob_mismatch, truncated_is_weights

__all__ = ["decoupled_gae", "gae_through_tools", "outcome_rewards", "entropy_from_logits", "token_logprobs", "KL_ESTIMATORS",
           "kl_penalty", "policy_loss", "value_loss", "masked_mean", "masked_sum", "masked_var", "masked_whiten",
           "explained_variance", "logprob_mismatch", "truncated_is_weights"]

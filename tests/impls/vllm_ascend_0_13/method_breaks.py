"""vllm-ascend 0.13.0's own methods broken the way upstream history broke such methods, for
``test_gate_catches``: each is ``breaking(original) -> broken`` for one method of the proposer or of
its MLA metadata builder.
"""

from __future__ import annotations


def sample_row_off_by_one(original):
    """``prepare_inputs_padded``: each sample row one row early."""

    def broken(self, *args, **kwargs):
        cad, rows, sample = original(self, *args, **kwargs)
        return cad, rows, sample - 1

    return broken


def first_valid_token(original):
    """``prepare_next_token_ids_padded``: the first valid sampled token taken for the last."""

    def broken(self, cad, sampled, *args, **kwargs):
        return original(self, cad, sampled[:, :1].contiguous(), *args, **kwargs)

    return broken


def seq_lens_lowered_twice(original):
    """``prepare_inputs``: the host ``seq_lens`` lowered by the rejected counts a second time."""

    def broken(self, cad, sampled, num_draft_tokens):
        spec, rows = original(self, cad, sampled, num_draft_tokens)
        drop = cad.seq_lens_cpu[: len(num_draft_tokens)] - spec.seq_lens_cpu
        spec.seq_lens_cpu = spec.seq_lens_cpu - drop
        return spec, rows

    return broken


def slot_from_next_row(original):
    """``MlaMetadataBuilder.build``: the step loop's first slot taken one row late (``slot_mapping += 1``
    from the wrong start)."""

    def broken(self, common_prefix_len, cad, model=None):
        md = original(self, common_prefix_len, cad, model)
        md.slot_mapping = md.slot_mapping.roll(-1)
        return md

    return broken

"""A DSPy ChatAdapter that writes the first output field's marker into the answer itself.

Small models never start their answer with DSPy's ``[[ ## field ## ]]`` marker (DESIGN.md: 100%
parse failures zero-shot). Prefilling it as the start of the assistant turn fixes the format;
the engines continue a trailing assistant message.
"""

from __future__ import annotations

import dspy


class PrefillChatAdapter(dspy.ChatAdapter):
    def __init__(self) -> None:
        super().__init__(use_json_adapter_fallback=False)  # a failed parse must not cost a second call

    def format(self, signature, demos, inputs):
        return [*super().format(signature, demos, inputs), {"role": "assistant", "content": self.prefill(signature)}]

    def parse(self, signature, completion):
        return super().parse(signature, self.prefill(signature) + completion)

    @staticmethod
    def prefill(signature) -> str:
        return f"[[ ## {next(iter(signature.output_fields))} ## ]]\n"

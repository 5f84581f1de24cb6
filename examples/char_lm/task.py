"""Multi-digit addition as a verifiable text task: prompt "07+35=", answer the sum's digits least significant first
("24" for 42, padded to a fixed width: "240"), then the end token "$". Reversed digits let a left-to-right model
carry as it writes, so a tiny transformer can learn the task in CPU minutes."""

from __future__ import annotations

import dataclasses

import torch

VOCAB = "0123456789+=$"
EOS = VOCAB.index("$")
TOKEN = {c: i for i, c in enumerate(VOCAB)}


@dataclasses.dataclass
class AdditionTask:
    digits: int = 2                 # operand width (zero-padded)

    @property
    def prompt_len(self) -> int:
        return 2 * self.digits + 2  # "ab+cd="

    @property
    def answer_len(self) -> int:
        return self.digits + 2      # the sum's digits + 1 (a carry), reversed, then "$"

    def sample(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """n operand pairs [n, 2] (uniform in [0, 10^digits)) and their prompts [n, prompt_len] as tokens."""
        pairs = torch.randint(0, 10**self.digits, (n, 2), generator=generator)
        return pairs, torch.stack([self.encode(f"{a:0{self.digits}d}+{b:0{self.digits}d}=") for a, b in pairs.tolist()])

    def answer(self, pairs: torch.Tensor) -> torch.Tensor:
        """[n, answer_len] the correct answers as tokens."""
        width = self.digits + 1
        return torch.stack([self.encode(f"{a + b:0{width}d}"[::-1] + "$") for a, b in pairs.tolist()])

    @staticmethod
    def encode(text: str) -> torch.Tensor:
        return torch.tensor([TOKEN[c] for c in text], dtype=torch.long)

    @staticmethod
    def decode(tokens: torch.Tensor) -> str:
        return "".join(VOCAB[int(t)] for t in tokens)

    def reward(self, pairs: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """[n] 1.0 where the response [n, answer_len] equals the answer (digits and end token), else 0.0."""
        return (responses == self.answer(pairs)).all(-1).float()

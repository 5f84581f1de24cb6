"""A tiny causal transformer over characters, with an optional value head (PPO's token-level critic)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


class Block(nn.Module):
    """Pre-LayerNorm causal self-attention and MLP."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """tokens [B, L] -> next-token logits [B, L, V] (and values [B, L] with `value_head`)."""

    def __init__(self, vocab: int, context: int, dim: int = 64, layers: int = 2, heads: int = 4,
                 value_head: bool = False):
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(context, dim))
        nn.init.normal_(self.position, std=0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.value = nn.Linear(dim, 1) if value_head else None

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.token(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        x = self.ln(x)
        return self.head(x), (self.value(x).squeeze(-1) if self.value is not None else None)

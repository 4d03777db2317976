import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Pre-LN transformer encoder block: x + MHA(LN(x)), then x + MLP(LN(x)) with a GELU MLP of width 4x."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        assert embed_dim % num_heads == 0, "num_heads must divide embed_dim"
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.ln1 = nn.LayerNorm(embed_dim)
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, 4 * embed_dim)
        self.fc2 = nn.Linear(4 * embed_dim, embed_dim)
        # Non-default scale and shift (seeded like every parameter): skipping them must fail.
        with torch.no_grad():
            for norm in (self.ln1, self.ln2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (self.head_dim**-0.5), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


batch_size = 16
seq_len = 512
embed_dim = 768
num_heads = 12


def get_inputs():
    x = torch.randn(batch_size, seq_len, embed_dim)
    return [x]


def get_init_inputs():
    return [embed_dim, num_heads]

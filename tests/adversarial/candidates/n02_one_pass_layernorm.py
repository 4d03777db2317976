"""N2: layernorm with a one-pass fp32 variance E[x^2] - E[x]^2: right on randn, off once the mean dwarfs the spread."""

from adversarial import numerics


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.ln = nn.LayerNorm(hidden_size)
        with torch.no_grad():  # the reference's seeded scale and shift, drawn in the same order
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return numerics.layernorm_rows(x, self.ln.weight, self.ln.bias, self.ln.eps, 1)

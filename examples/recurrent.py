"""An LSTM written with tg.scan: its generated backward (a scan running backwards in
time), checked against torch.nn.LSTM with the same weights.

    .venv/bin/python examples/recurrent.py
"""

from __future__ import annotations

import numpy as np
import torch

import tegrad as tg

L, N, IN, H = 6, 3, 4, 5  # steps, batch, input size, hidden size
rng = np.random.default_rng(0)
x = tg.placeholder((L, N, IN), "float64", name="x")
h0 = tg.placeholder((N, H), "float64", name="h0")
c0 = tg.placeholder((N, H), "float64", name="c0")
w_ih = tg.placeholder((4 * H, IN), "float64", name="w_ih")
w_hh = tg.placeholder((4 * H, H), "float64", name="w_hh")
out, h_n, c_n = tg.nn.lstm(x, h0, c0, w_ih, w_hh)
d_out = tg.placeholder(out.shape, "float64", name="d_out")
grads = tg.gradient(out, [x, h0, c0, w_ih, w_hh], head=d_out)

print("scans in the weight gradient's program (the forward LSTM; its adjoint, backwards in time):")
print("\n".join(line for line in str(grads[4]).splitlines() if "scan(" in line))

values = {p: rng.standard_normal(p.shape) * 0.5 for p in (x, h0, c0, w_ih, w_hh, d_out)}
got = tg.evaluate([out, *grads], values)

lstm = torch.nn.LSTM(IN, H, bias=False).double()
with torch.no_grad():
    lstm.weight_ih_l0.copy_(torch.from_numpy(values[w_ih]))
    lstm.weight_hh_l0.copy_(torch.from_numpy(values[w_hh]))
tx, th, tc = (torch.tensor(values[p], requires_grad=True) for p in (x, h0, c0))
ref_out, _ = lstm(tx, (th[None], tc[None]))
ref = torch.autograd.grad(ref_out, [tx, th, tc, lstm.weight_ih_l0, lstm.weight_hh_l0],
                          torch.from_numpy(values[d_out]))
print(f"output: max |tegrad - torch| = {np.abs(got[0] - ref_out.detach().numpy()).max():.1e}")
for name, g, r in zip(["x", "h0", "c0", "w_ih", "w_hh"], got[1:], ref, strict=True):
    print(f"d{name}: max |tegrad - torch| = {np.abs(g - r.numpy()).max():.1e}")

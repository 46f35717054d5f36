"""The tensorwire tour: remote tensors with PyTorch's habits, on the embedded local cluster.

Run: ``python examples/quickstart.py`` (starts a dispatcher and two CPU workers for you; set
``TENSORWIRE_ADDRESS=tcp://host:5555`` to use a running cluster instead).
"""

from __future__ import annotations

import time

import numpy as np

import tensorwire as tw


def main() -> None:
    t0 = time.perf_counter()
    tw.connect(devices=["cpu:0", "cpu:1"])  # no address: an embedded cluster, stopped at exit
    print(f"cluster up in {time.perf_counter() - t0:.1f}s, devices: {tw.devices()}")

    tw.manual_seed(0)
    x = tw.randn(256, 128, device="cpu:0")
    w = tw.randn(128, 64, device="cpu:0")
    y = ((x @ w).relu() * 2 + 1).sum(dim=1, keepdim=True)  # recorded, nothing sent yet
    print("y:", y.shape, y.dtype, y.device)  # inferred on the client, no round trip
    print("first rows:", y[:3].numpy().ravel())  # one batch shipped, executed, fetched

    ref = ((x.numpy() @ w.numpy()).clip(min=0) * 2 + 1).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4)

    z = y.to("cpu:1").mean().item()  # cross-device move
    print(f"mean on cpu:1: {z:.4f}")

    # in-place updates and views, as in torch
    a = tw.arange(12.0).reshape(3, 4)
    row = a[1]
    a[:, 0] = -1
    row += 100
    print("a after in-place ops:\n", a)

    # a training-style loop replays a cached plan after the first step
    t = tw.zeros(1000)
    t0 = time.perf_counter()
    for _ in range(200):
        t = (t * 0.9 + 1).clamp(max=50)
    tw.synchronize()
    print(f"200 steps in {(time.perf_counter() - t0) * 1e3:.1f} ms; t[0] = {t[0].item():.4f}")

    # errors surface with the line that recorded the op
    try:
        tw.arange(5).gather(0, tw.tensor([9])).numpy()
    except IndexError as e:
        print("caught:", str(e).splitlines()[0])
    print("memory:", tw.memory_stats()["devices"])
    tw.disconnect()
    print("ok")


if __name__ == "__main__":
    main()

"""Checks of ``placement experiment``'s distributed search against the world (CUDA here, a Ray
address answering), one line each, for exit code 2; the settings themselves are checked by
[`tasks.config.RayOptions`][tasks.config.RayOptions]."""

from __future__ import annotations


def check_policy_device(policy_device: str, ray_address: str | None) -> str | None:
    """``--policy-device cuda`` on a local Ray needs CUDA here (``torch.cuda.is_available()``); on
    a Ray cluster (``ray_address``) the controllers' nodes decide, and Ray reports a missing GPU
    itself. (Whether the learners can run there is the config's check:
    [`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig].)"""
    if policy_device == "cpu" or ray_address is not None:
        return None
    import torch

    if not torch.cuda.is_available():
        return "--policy-device cuda: torch sees no CUDA device on this machine (give --ray-address of a cluster with GPUs, or use cpu)"
    return None


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + an empty SETTINGS frame


def probe_ray_address(address: str | None, timeout_s: float = 5.0) -> str | None:
    """The problem with ``--ray-address`` (``host:port`` of a Ray head's GCS, or ``ray://host:port`` of
    its client server), or ``None``: something must accept a TCP connection there within ``timeout_s``
    and answer as a gRPC server does (both are gRPC: an HTTP/2 SETTINGS frame in reply to the HTTP/2
    preface). ``auto`` and ``None`` are not probed (Ray finds the cluster itself)."""
    import socket

    if address is None or address == "auto":
        return None
    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"--ray-address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT"
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(_HTTP2_PREFACE)
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        return f"--ray-address {address!r}: nothing answers there ({exc.strerror or type(exc).__name__})"
    if len(head) < 9 or head[3] != 0x04:
        return f"--ray-address {address!r}: something answers there, but not a Ray (gRPC) server"
    return None

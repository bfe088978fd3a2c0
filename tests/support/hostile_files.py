"""Files a hostile agent leaves in its workspace for the judge to read (issue 36 item 7), and
what the judge's prompt must then say of each: tests/test_judge.py, tests/test_judged_graders.py."""
from __future__ import annotations

import os
from pathlib import Path

SPARSE_BYTES = 1 << 30  # a 1 GiB sparse file: costs no disk, cost 4.2 GB of memory when read whole


def plant_hostile_files(ws: Path, outside: Path) -> dict[str, str]:
    """Files a hostile agent leaves for the judge; {name: the reason the prompt must give}."""
    outside.mkdir()
    (outside / "secret.py").write_text("API_KEY = 'sk-outside-secret-0123'\n")
    (ws / "leak.py").symlink_to(outside / "secret.py")
    (ws / "environ.py").symlink_to("/proc/self/environ")
    with open(ws / "big.py", "wb") as big:
        os.truncate(big.fileno(), SPARSE_BYTES)
    (ws / "blob.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00IHDR")
    (ws / "latin.py").write_bytes(b"caf\xe9 = 1\n")
    os.mkfifo(ws / "pipe.py")
    return {"leak.py": "a link, not followed", "environ.py": "a link, not followed", "big.py": "a binary file",
            "blob.py": "a binary file", "latin.py": "a binary file", "pipe.py": "a FIFO, socket or device, not opened"}


def environ_secret() -> str:
    return Path("/proc/self/environ").read_bytes().split(b"\0")[0].decode("utf-8", "replace")


def assert_named_not_shown(text: str, planted: dict[str, str]) -> None:
    assert "sk-outside-secret" not in text and environ_secret() not in text
    for rel, why in planted.items():
        assert f"### {rel}\n```\n[ponybench: not shown: {why}" in text, (rel, text[:3000])

"""Where the load pods meet (resources/loadgen/workers/podsync.py): a folder of empty objects whose
names say who arrived when, under the run's prefix (`s3://…/runs/<id>/barrier`) or a local
folder. Only names are listed and written, nothing is read back.

Credentials come from the usual AWS chain (runstore.filesystem); an error names the
operation and the S3 error, never a credential (contract.redact)."""

from __future__ import annotations

import os

import pyarrow.fs as pafs
from servingbench.resources.contract.redact import short_error
from servingbench.resources.storage import runstore

TIMEOUT_S = 5.0  # one request: a meeting retries within its own deadline
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class Board:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.fs, self.base = runstore.filesystem(uri, timeout_s=TIMEOUT_S)
        self.local = not runstore.is_remote(uri)

    def __repr__(self) -> str:
        return f"Board({self.uri!r})"

    def put(self, name: str, data: bytes) -> None:
        path = f"{self.base}/{name}"
        try:
            if self.local:
                self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(path) as out:
                out.write(data)
        except OSError as exc:
            raise OSError(f"writing {self.uri}/{name}: {_clean(exc)}") from None

    def names(self, folder: str) -> list[str]:
        """The names of the objects in `folder` (none when it does not exist yet)."""
        path = f"{self.base}/{folder}"
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except OSError as exc:
            raise OSError(f"listing {self.uri}/{folder}/: {_clean(exc)}") from None
        return [i.base_name for i in infos if i.type == pafs.FileType.File]


def _clean(exc: OSError) -> str:
    """The error's text, short, redacted as every error the load generator records is, and
    without any credential the environment holds."""
    return short_error(str(exc), tuple(v for n in _SECRET_ENV if (v := os.environ.get(n))))

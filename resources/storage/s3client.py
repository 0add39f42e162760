"""A boto3 S3 client as a pyarrow filesystem, so the run store works the same through a
client it is handed (the composition's S3 resource, configured where the pipeline is
composed) as through pyarrow's own S3 filesystem: `filesystem(client)` is a
`pyarrow.fs.PyFileSystem` whose paths are `bucket/key`.

Only what the run store asks is implemented: file and prefix information, listings,
streams in and out (an upload is spooled to a temporary file and sent when the stream
closes), whole-object random access for parquet, server-side copy and delete. A key that
ends in `/` is a directory marker some tools write; it is never listed as a file."""

from __future__ import annotations

import io
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

_MISSING = ("404", "NoSuchKey", "NotFound")


def filesystem(client: Any) -> pafs.PyFileSystem:
    return pafs.PyFileSystem(ClientHandler(client))


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.strip("/").partition("/")
    return bucket, key


class _Upload(io.RawIOBase):
    """A writable stream spooled to a temporary file, uploaded as one object on close."""

    def __init__(self, client: Any, bucket: str, key: str) -> None:
        self.client, self.bucket, self.key = client, bucket, key
        self.spool = tempfile.TemporaryFile()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return self.spool.write(data)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.spool.seek(0)
            self.client.upload_fileobj(self.spool, self.bucket, self.key)
        finally:
            self.spool.close()
            super().close()


class ClientHandler(pafs.FileSystemHandler):
    def __init__(self, client: Any) -> None:
        self.client = client

    def __eq__(self, other) -> bool:
        return isinstance(other, ClientHandler) and other.client is self.client

    def __ne__(self, other) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return "s3-client"

    def normalize_path(self, path: str) -> str:
        return path.strip("/")

    def _info(self, path: str) -> pafs.FileInfo:
        bucket, key = _split(path)
        if not key:
            return pafs.FileInfo(path, pafs.FileType.Directory)
        try:
            head = self.client.head_object(Bucket=bucket, Key=key)
            return pafs.FileInfo(path, pafs.FileType.File, size=head["ContentLength"])
        except self.client.exceptions.ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) not in _MISSING:
                raise
        listed = self.client.list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/", MaxKeys=1)
        kind = pafs.FileType.Directory if listed.get("KeyCount") else pafs.FileType.NotFound
        return pafs.FileInfo(path, kind)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        bucket, key = _split(selector.base_dir)
        prefix = key.rstrip("/") + "/" if key else ""
        kwargs = {"Bucket": bucket, "Prefix": prefix}
        if not selector.recursive:
            kwargs["Delimiter"] = "/"
        out, dirs = [], set()
        for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
            for obj in page.get("Contents") or []:
                if obj["Key"].endswith("/"):
                    continue
                out.append(pafs.FileInfo(f"{bucket}/{obj['Key']}", pafs.FileType.File,
                                         size=obj["Size"]))
                if selector.recursive:  # every folder between the base and the object
                    parts = obj["Key"][len(prefix):].split("/")[:-1]
                    dirs.update(prefix + "/".join(parts[:i + 1]) for i in range(len(parts)))
            dirs.update(p["Prefix"].rstrip("/") for p in page.get("CommonPrefixes") or [])
        if not out and not dirs and not selector.allow_not_found:
            raise FileNotFoundError(f"{selector.base_dir}: no such prefix")
        return out + [pafs.FileInfo(f"{bucket}/{d}", pafs.FileType.Directory) for d in sorted(dirs)]

    def create_dir(self, path: str, recursive: bool) -> None:
        pass  # S3 has no folders: writing a key makes its prefix

    def delete_dir(self, path: str) -> None:
        self.delete_dir_contents(path, missing_dir_ok=True)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        for info in self.get_file_info_selector(
                pafs.FileSelector(path, recursive=True, allow_not_found=missing_dir_ok)):
            if info.type == pafs.FileType.File:
                self.delete_file(info.path)

    def delete_root_dir_contents(self) -> None:
        raise OSError("refused: deleting a whole bucket through the run store")

    def delete_file(self, path: str) -> None:
        bucket, key = _split(path)
        self.client.delete_object(Bucket=bucket, Key=key)

    def copy_file(self, src: str, dest: str) -> None:
        sb, sk = _split(src)
        db, dk = _split(dest)
        self.client.copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk})

    def move(self, src: str, dest: str) -> None:
        self.copy_file(src, dest)
        self.delete_file(src)

    def _get(self, path: str):
        bucket, key = _split(path)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"]
        except self.client.exceptions.NoSuchKey:
            raise FileNotFoundError(path) from None

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(self._get(path), mode="r")

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self._get(path).read())

    def open_output_stream(self, path: str, metadata) -> pa.NativeFile:
        bucket, key = _split(path)
        return pa.PythonFile(_Upload(self.client, bucket, key), mode="w")

    def open_append_stream(self, path: str, metadata) -> pa.NativeFile:
        raise OSError("S3 objects cannot be appended to")

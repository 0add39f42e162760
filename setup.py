"""The one import name: each of the design card's top-level folders installs as
`servingbench.<folder>` (setuptools' package-dir mapping), so installing servingbench adds
exactly one top-level name to a user's environment. Metadata, dependencies and tools are in
pyproject.toml; this file only computes the mapping, which pyproject.toml cannot express
without listing every sub-package by hand."""

from setuptools import find_packages, setup

FOLDERS = ("pipelines", "assets", "resources", "emulator", "sql")

packages: list[str] = []
package_dir: dict[str, str] = {}
for folder in FOLDERS:
    for sub in [folder, *(f"{folder}.{p}" for p in find_packages(folder))]:
        packages.append(f"servingbench.{sub}")
        package_dir[f"servingbench.{sub}"] = sub.replace(".", "/")

setup(packages=packages, package_dir=package_dir)

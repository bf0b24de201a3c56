"""The built-in search spaces, shipped in the wheel as `autotune.search_spaces` (see
pyproject.toml: this folder is mapped into the package)."""

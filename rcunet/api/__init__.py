"""The user-facing socket API, compatible with Python's ``socket`` module."""

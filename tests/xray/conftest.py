"""The panel's tests use the engine's fixtures: the shipped tinychat and its tokenizer."""
from tests.serving.conftest import model, tok  # noqa: F401

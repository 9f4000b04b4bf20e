"""The job spec's error type, in a module of its own so that every layer of the spec (schema, TOML,
flags) can raise it without importing the others."""


class SpecError(ValueError):
    """A job spec value or key that cannot be used; the message names it and says what is valid."""

"""The one exception type that the CLI turns into a single clear line and a non-zero exit."""


class UserError(Exception):
    """Bad input from the user: the message says what is wrong and what to do."""

"""Bad-input cases for tests/test_bad_inputs.py, one module per category (each defines CASES)."""

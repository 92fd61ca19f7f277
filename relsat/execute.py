"""NumPy executor (placeholder: being written)."""
def run(*a, **k):  # pragma: no cover
    raise NotImplementedError
allclose = run

"""One measurement of the research benchmark: the dfc call in the default mode and the same computation
in numpy, JAX (jit) and PyTorch (eager), plus the check that dfc agrees with the references."""


class Case:
    """dfc_call: calls the @dfc.function with its arguments (no Session options: the default mode).
    numpy: runs the numpy version once (None: no numpy version, `numpy_note` says why).
    jax, torch: build the competitor (imports, jit wrapper) and return a function that runs it once.
    check: returns [(label, reference result, result)] on the same inputs (dfc against numpy, JAX or
    PyTorch; a competitor against numpy); each pair must agree within rtol/atol."""

    def __init__(self, name, description, dfc_call, numpy, jax, torch, check, rtol, atol, note="",
                 numpy_note="", jax_note="", torch_note=""):
        self.name, self.description, self.dfc_call = name, description, dfc_call
        self.numpy, self.jax, self.torch, self.check = numpy, jax, torch, check
        self.rtol, self.atol, self.note = rtol, atol, note
        self.numpy_note, self.jax_note, self.torch_note = numpy_note, jax_note, torch_note

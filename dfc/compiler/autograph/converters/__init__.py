"""One converter per feature; `PIPELINE` in dfc.compiler.autograph.conversion runs them in order."""

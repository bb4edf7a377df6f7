"""Debugging stage, above the pipeline: `inspection.py` (examine: which executor runs each op),
`verify.py` (verify=: each call checked against eager), `reproduce.py` (a failing call written out as a script).
"""

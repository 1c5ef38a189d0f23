"""Facts by rules, never by the model: what the messages show was done, run, broken and asked.

shell.py reads command lines (files touched, run keys), output.py reads tool output (error
lines, tallies, exit codes), actions.py pairs each tool call with its result as an `Action`
(scanned once per compaction), ledger.py folds actions and the user's words into the carried
`Ledger`, workstate.py decides Done / In Progress / Blocked from the same actions. Nothing here
renders markdown: the checkpoint (`worker.pipeline.checkpoint`) does.
"""

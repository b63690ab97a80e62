"""Tools: operators' commands over a group's archive, outside the scheduled run.
`verify` (every file readable, each offset in exactly one file, no hole below the token),
`backfill` (rebuild an event-time group's slices from the backup group) and `cat`
(print one archived file).
"""

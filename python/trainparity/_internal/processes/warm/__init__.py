"""Warm starts: a check's children forked from a server that imported torch once.

`starter` decides how each child starts and asks a server for it; `server_handle`
is the check's side of one server, `pool` keeps idle servers between checks.
`server`, `child` and `ranks` run in the server and its forked children: they are
run or loaded from their files, never imported, and use the standard library only.
"""

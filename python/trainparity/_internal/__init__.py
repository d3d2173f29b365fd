"""trainparity's private tier: every module here may move without notice.

The public face is `trainparity` and the module paths docs/api.md lists; they
only re-export from here (docs/design.md, "Two tiers")."""

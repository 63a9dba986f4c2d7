"""Where a build came from; scripts/stamp-build overwrites this file in a release build's copy of
the source (the wheel, sdist and image). None here: a checkout or an unstamped build."""

COMMIT: str | None = None
COMMIT_DATE: str | None = None

"""Reports: terminal (rich), Markdown and HTML views of trials, jobs and generation diffs."""

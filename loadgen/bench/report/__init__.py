"""One results model rendered: Markdown, charts, comparisons of runs, and the
seeds' published figures beside ours."""

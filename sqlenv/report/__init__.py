"""The report: tables, paired comparisons, curves and transcripts in markdown, and their plots.

The top layer of the library: it reads evaluation results (`sqlenv.eval`).
"""

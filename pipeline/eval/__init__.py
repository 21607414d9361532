"""Evaluation of the model's decisions and extractions on labelled cases: cases (the format and
the shipped set), run (the job's code on each case, no store access), outcome, report (the scores
and the table), reviewed (reviewers' verdicts as cases)."""

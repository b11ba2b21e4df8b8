"""The course's grading tools that students run too: the allowed-calls check
(grading.symbols), make check (grading.check, its children started by grading.process),
and what a correct result is (grading.oracle, which tests.py shares with the grader)."""
# BEGIN STAFF
# And the staff's: the sandboxed grader (grading.grade) and its steps, the Gradescope package
# (grading.autograder), the handout generator (grading.handout). The measuring tools live in
# bench/; grading.bench and grading.e2e are their old names.
# END STAFF

"""The course's grading tools: the sandboxed grader (grading.grade) and its steps, the
Gradescope package (grading.autograder), the handout generator (grading.handout), and what
students run too (the allowed-calls check grading.symbols, make check's grading.check,
what a correct result is: grading.oracle, which tests.py shares).
The measuring tools live in bench/; grading.bench and grading.e2e are their old names."""

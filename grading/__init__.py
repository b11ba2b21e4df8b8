"""Staff tools for opencl_functions: the handout generator (grading.handout), the
sandboxed grader (grading.grade) and the Gradescope package (grading.autograder)."""

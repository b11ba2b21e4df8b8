"""Grading and benchmarking tools for opencl_functions. Staff keep the handout generator
(grading.handout), the sandboxed grader (grading.grade) and the Gradescope package
(grading.autograder); the student handout carries only what students may run."""

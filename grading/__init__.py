"""Staff tools for opencl_functions: the handout generator (grading.handout), the sandboxed
grader (grading.grade) and the Gradescope package (grading.autograder), and the benchmark
(grading.bench) with its baselines (grading.baselines). The student handout carries only
what students may run."""

"""Staff tools: the grader (grading.grade) and the benchmark (grading.bench) with its baselines."""

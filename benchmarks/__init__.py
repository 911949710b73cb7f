"""Side-by-side benchmarks of lockkit against peer lock libraries; run ``scripts/bench``.

Not part of the test suite: nothing here asserts, it measures and prints tables.
"""

"""The bottom layer: data types, the error tree, the registry pattern, settings and answer grading."""

"""What the pipeline finds (shots, on-screen text, speech) against edits whose truth is known."""

"""Backfills: processing videos that did not come as fresh uploads (a catalogue, a new stage
over videos already done), in the room fresh uploads leave."""

"""The quality corpus's talks: edits that only talk, over one still shot, for what the other
edits' few sentences cannot show.

- Sentences said across the end of a window of speech recognition (every ``window_s``, 30 s,
  of the video's timeline): a talk with pauses of 0.6 s between sentences, one of them said
  across 30 s and one across 60 s, and a talk with pauses of 0.35 s, one said across 30 s.
  A sentence cut at a window's end loses words (``speech_boundary_words_lost``).
- Speech whose language is known and not English, in the espeak-ng voices Whisper base
  recognises (German, Spanish; its French and Mandarin it does not), and talks that switch
  language after a pause of 1.5 s within one window (``speech_language_*``): from German to
  twice as much English, and from Spanish to as much English.

Each start is where the sentence's WAV starts, laid out from espeak-ng's durations (the voice
within each, ``devkit.speech_videos.voiced_span``) so that the pauses between voices are as
said, and the voice of each sentence marked "across" holds the window's end with about a
second on either side. The ``--quick`` corpus has the switching talk alone: it also says a
sentence across 30 s.
"""

from __future__ import annotations

from bench.quality.corpus import Edit
from devkit.edited_videos import Shot

_SWITCH = Edit(
    "talk-de-en",
    "German, a pause of 1.5 s, then English, within one window; the last sentence across 30 s",
    (Shot(32.5, seed=101),),
    speech=(
        (0.09, "Guten Morgen und herzlich willkommen im Museum."),
        (3.13, "Die Bibliothek schließt heute am frühen Abend."),
        (6.12, "Der Zug nach Berlin fährt in wenigen Minuten ab."),
        (10.25, "Welcome back to the second half of our tour."),
        (13.15, "The stairs on the left lead down to the river."),
        (15.72, "Please hold on to the rail because the steps are steep."),
        (19.16, "At the bottom you will find the old boat house."),
        (22.15, "It was painted green by the rowing club last spring."),
        (25.42, "The boat house is open to visitors on most weekends."),
        # Across 30 s:
        (28.88, "Thank you for listening and have a lovely afternoon."),
    ),
    languages=("de",) * 3 + ("en",) * 7,
)

_FULL = (
    Edit(
        "talk-windows",
        "a talk with pauses of 0.6 s; one sentence across 30 s, one across 60 s",
        (Shot(66.0, seed=102),),
        speech=(
            (2.98, "Good evening and welcome to our short walk through the old town."),
            (6.83, "The market square was built around a well that still works today."),
            (10.8, "On your right is the bakery that opened before the railway came."),
            (14.5, "Its bread is still baked in the same brick oven every morning."),
            (18.11, "Further along the street you can see the tower of the town hall."),
            (21.7, "The clock on the tower was repaired by a local watchmaker."),
            (24.99, "Every hour it rings a short tune that children love to hear."),
            # Across 30 s:
            (28.55, "Behind the town hall there is a quiet garden with a small pond."),
            (32.31, "In the summer the garden is used for concerts and open air films."),
            (36.27, "Please stay on the paths and keep away from the flower beds."),
            (39.95, "The bridge ahead crosses the river where the old mill once stood."),
            (43.72, "From the middle of the bridge you can see the hills to the north."),
            (47.06, "Fishing boats used to tie up along the wall below the bridge."),
            (50.7, "Today the river is mostly used by rowing clubs and ducks."),
            (54.46, "On the far bank there is a museum about the history of the mill."),
            # Across 60 s:
            (58.05, "It is open every afternoon and the entrance is free for children."),
            (61.95, "Thank you for joining us and enjoy the rest of your evening."),
        ),
    ),
    Edit(
        "talk-tight",
        "a talk with pauses of 0.35 s; one sentence across 30 s",
        (Shot(32.5, seed=103),),
        speech=(
            (2.08, "Remember to take your umbrella because the clouds are coming in."),
            (5.53, "The guide will wait by the fountain for anyone who has questions."),
            (9.33, "Lunch is served in the garden behind the museum at noon."),
            (12.58, "Please turn off your phone before the concert begins."),
            (15.68, "The last bus back to the station leaves from the main square."),
            (19.03, "Tickets for the boat trip can be bought at the harbor office."),
            (22.32, "Children under the age of twelve must stay with an adult."),
            (25.3, "The library upstairs has a fine collection of old maps."),
            # Across 30 s:
            (28.62, "If you get lost just ask anyone for the way to the square."),
        ),
    ),
    Edit(
        "talk-de",
        "German, pauses of 0.6 s",
        (Shot(13.5, seed=104),),
        speech=(
            (0.49, "Das Museum ist heute bis zum Abend geöffnet."),
            (3.55, "Im Garten hinter dem Rathaus gibt es einen kleinen Teich."),
            (7.02, "Die Brücke über den Fluss ist sehr alt."),
            (9.61, "Vielen Dank für Ihren Besuch und einen schönen Tag noch."),
        ),
        languages=("de",) * 4,
    ),
    Edit(
        "talk-es",
        "Spanish, pauses of 0.6 s",
        (Shot(13.5, seed=105),),
        speech=(
            (0.49, "Buenos días y bienvenidos a la biblioteca."),
            (3.38, "La tienda cierra temprano esta noche."),
            (5.89, "El museo está abierto todos los días por la tarde."),
            (9.22, "Muchas gracias por su visita y que tenga un buen día."),
        ),
        languages=("es",) * 4,
    ),
    Edit(
        "talk-es-en",
        "Spanish, a pause of 1.5 s, then as much English",
        (Shot(12.5, seed=106),),
        speech=(
            (0.49, "Bienvenidos al mercado de la ciudad."),
            (3.1, "Las frutas y las verduras son muy frescas."),
            (6.91, "The market is open every day except Sunday."),
            (9.85, "Please pay at the counter by the door."),
        ),
        languages=("es", "es", "en", "en"),
    ),
    _SWITCH,
)


def talks(quick: bool) -> tuple[Edit, ...]:
    """The switching talk of ``--quick``, or all of them."""
    return (_SWITCH,) if quick else _FULL

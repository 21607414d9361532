"""The glossary: what each outcome, state, badge and mode word the dashboard shows means."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard import glossary as words
from dashboard.access import role_required


@role_required("viewer")
@require_GET
def glossary(request):
    sections = [
        {
            "key": section.key,
            "title": section.title,
            "words": [
                (word, words.anchor(word, section.key), text)
                for word, text in section.words.items()
            ],
        }
        for section in words.SECTIONS
    ]
    return render(request, "dashboard/glossary.html", {"sections": sections})

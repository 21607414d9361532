"""The memory store app."""

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory store"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from memory.threads import blas_threads, shorter_switch_interval

        blas_threads(1)  # see memory.threads: small products, no spinning BLAS threads
        shorter_switch_interval()  # see memory.threads: the job's other threads wait less

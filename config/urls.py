"""URL map: the JSON API under /api/, login, Django admin, and the dashboard."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard.throttle import ThrottledAuthenticationForm

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "login/",
        auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("api.urls")),
    path("", include("dashboard.urls")),
]

# Errors that escape a view: JSON under /api/, Django's pages elsewhere.
handler404 = "api.http.handler404"
handler500 = "api.http.handler500"

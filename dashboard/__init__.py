"""The Streamlit dashboard over asv results (see app.py); views.py and data.py hold its
UI-free logic."""

"""The Streamlit dashboard over asv results (see app.py); views/ and data.py hold its
UI-free logic."""

"""course_lib"""

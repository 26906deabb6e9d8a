"""golden"""

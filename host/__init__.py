"""host"""
